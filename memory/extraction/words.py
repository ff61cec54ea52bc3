"""The word lists of the rule-based extractor's value checks (``values``), English and
Chinese: data, kept apart from the code that reads it."""

from __future__ import annotations

from memory.extraction.text import _set

_EN_COMMON = _set(
    """a an the not so very really just also still here there home back fine good great ok okay
    well sorry sure ready done tired happy sad glad busy free bored hungry thirsty sleepy sick ill
    hurt lost confused curious excited nervous worried afraid scared angry upset mad lonely alone
    single married engaged divorced pregnant retired new old young late early right wrong serious
    kidding joking going trying looking doing feeling working living thinking wondering planning
    learning studying moving leaving coming getting having being using waiting talking asking
    telling writing reading playing watching interested allergic able unable about almost always
    never currently now today tomorrow tonight later soon in on at from with into out off up down
    over to for of by as like than that this it what who whatever anything nothing something
    everything someone somebody nobody everyone everybody anyone anybody anytime maybe crazy names
    whenever again actually only probably definitely kind sort more less too much many all both
    either neither each every some any no yes yeah hard easy long short weird strange unusual
    common difficult simple spelled pronounced boring cool nice funny stupid smart male female gay
    straight vegan vegetarian human fat thin tall rich poor broke safe bad better best worse worst
    dead alive awake asleep online offline available unemployed employed self myself yours mine
    secret private unknown irrelevant important unique same different rather quite pretty totally
    completely absolutely literally honestly basically mostly already finally recently even though
    thanks thank you he she they we me him her them us and or but if when because since is are was
    were be been am do does did have has had can could would should get got go went know think see
    want need mean say said tell call name called named used supposed lucky proud sure certain
    fine sorry okay alright ok thrilled delighted blessed grateful thankful stressed exhausted
    overwhelmed fine ready starving dying struggling cold hot warm fine calm my your his our their
    its"""
)

_DEMONYMS = _set(
    """american british english scottish welsh irish canadian australian chinese japanese korean
    vietnamese thai filipino filipina indonesian malaysian singaporean indian pakistani bangladeshi
    nepali nepalese iranian persian iraqi syrian lebanese israeli jewish palestinian turkish
    egyptian moroccan algerian tunisian nigerian kenyan ethiopian ghanaian african european asian
    latino latina hispanic mexican brazilian argentinian argentine chilean colombian peruvian
    venezuelan cuban spanish portuguese french german italian dutch belgian swiss austrian swedish
    norwegian danish finnish icelandic polish czech slovak hungarian romanian bulgarian greek
    serbian croatian ukrainian russian belarusian taiwanese cantonese hongkonger mongolian tibetan
    uyghur arab arabic kurdish armenian georgian kazakh uzbek afghan saudi emirati qatari kiwi
    aussie brit christian catholic protestant muslim buddhist hindu sikh atheist agnostic mormon
    orthodox jain taoist republican democrat liberal conservative libertarian"""
)

_NAME_PARTICLES = _set(
    "de da di du del della der den van von la le bin binti ibn al el ter ten y st"
)

_EN_PRONOUN_START = _set(
    """it its it's this that these those you your yours u ur him his her hers them their theirs
    they us our me myself everything anything nothing something everyone everybody anyone anybody
    someone somebody nobody none all what how when where why who which whether if there here such
    being having one ones people i"""
)

_EN_PRONOUN_ANY = _set("you your yours u ur him her them it this that he she they")

_EN_NOT_ITEMS = _set(
    """thanks thank ok okay yes yeah yep no nope lol haha too also very much so well fine sure
    please more less most least a an the to and or but lots alot best better than though anyway
    really tbh btw honestly seriously things stuff big huge great massive real true avid crazy
    total diehard die-hard i me"""
)

_EN_VAGUE = _set(
    """idea way thing things stuff one ones fact sound look feeling answer response suggestion
    plan point part question reply job lot kind sort type bit"""
)

_EN_JOBS = _set(
    """nurse chef cook pilot architect surgeon barista clerk judge cashier vet veterinarian
    paramedic mechanic ceo cto cfo coo founder cofounder co-founder intern nanny maid tailor
    butcher chemist nun monk priest pastor rabbi imam soldier sailor marine cop detective sheriff
    firefighter analyst economist attorney solicitor barrister magistrate diplomat politician
    mayor senator dj model artist poet novelist author actor actress dancer singer comedian host
    presenter anchor reporter editor producer director animator illustrator designer developer
    programmer coder engineer technician scientist researcher professor lecturer teacher tutor
    instructor coach trainer therapist psychologist psychiatrist counselor counsellor pharmacist
    dentist doctor physician midwife caregiver carer receptionist secretary assistant manager
    executive consultant accountant auditor banker trader broker investor entrepreneur freelancer
    contractor plumber electrician carpenter builder welder mason painter gardener farmer
    fisherman miner driver courier chauffeur waiter waitress bartender baker housekeeper janitor
    cleaner guard officer student postdoc phd librarian archivist curator translator interpreter
    photographer videographer journalist blogger youtuber streamer influencer writer copywriter
    marketer salesperson recruiter administrator admin paralegal lawyer surveyor astronaut
    optometrist physiotherapist chiropractor homemaker housewife househusband dietitian
    nutritionist paramedic scholar undergrad undergraduate graduate fellow resident-physician
    surgeon sommelier florist jeweler jeweller locksmith tiler roofer glazier upholsterer
    veterinary vet-tech nursing teaching accounting engineering consulting marketing banking
    farming programming tutoring sales finance law medicine research journalism"""
)

_EN_NON_JOBS = _set(
    """mother father brother sister daughter grandmother grandfather partner lover member user
    customer beginner learner newcomer foreigner stranger believer dreamer winner loser smoker
    drinker sleeper eater thinker listener fighter survivor visitor neighbor neighbour senior
    junior minor major gamer runner swimmer player reader watcher follower supporter speaker
    rider owner holder fan nerd geek person people human man woman guy girl boy kid child adult
    teenager mom mum dad wife husband widow widower bachelor traveler traveller hiker climber
    cyclist optimist pessimist perfectionist realist idealist introvert extrovert vegetarian
    vegan christian muslim atheist buddhist catholic civilian guardian tenant participant
    applicant immigrant migrant patient resident parent citizen native local expat newbie noob
    rookie pro expert fanatic addict enthusiast hobbyist collector gentleman german shopper
    killer monster leader server answer number order corner river summer winter water paper
    letter matter power center centre computer monster sucker joker talker walker worker
    lover hater sinner team group unit pair whole one"""
)

_EN_LANGUAGES = _set(
    """english mandarin cantonese chinese japanese korean french german spanish italian
    portuguese russian arabic hindi urdu bengali punjabi tamil telugu marathi gujarati thai
    vietnamese indonesian malay tagalog filipino dutch swedish norwegian danish finnish polish
    czech greek turkish hebrew persian farsi swahili ukrainian hungarian romanian latin esperanto
    asl shanghainese hokkien hakka teochew taiwanese catalan basque irish welsh gaelic afrikaans
    zulu amharic yoruba igbo hausa nepali sinhala khmer lao burmese mongolian tibetan uyghur
    kazakh serbian croatian bulgarian slovak slovenian lithuanian latvian estonian icelandic"""
)

# Chinese
_ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖萧田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫阎段雷侯龙史陶黎贺顾"
    "毛郝龚邵万钱严覃武戴莫孔汤常温康施牛樊葛邢齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿焦俞左柳"
    "甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂苗谷盛曲翁冉骆蓝辛靳管柴蒙鲍喻祁蒲房滕屈饶牟艾尤"
    "穆农卓吉缪简项麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂佟臧闵苟邬卞姬仇栾隋商刁沙荣巫寇"
    "桑郎甄丛仲虞敖巩佘池查麻苑迟邝封匡鞠惠荆冀郁胥班储栗燕楚鄢劳谌奚皮粟冼蔺闻厉伊仝阚帅"
    "屠朴廉禹祖漆卿狄晋扈晁芮阙浦戈鹿邸雍辜羊乌裘亓邰赫杭逯隆茹诸慕嵇湛戎茅揭尉檀昝"
)

_ZH_COMPOUND_SURNAMES = (
    "欧阳",
    "司马",
    "诸葛",
    "上官",
    "东方",
    "皇甫",
    "令狐",
    "慕容",
    "尉迟",
    "公孙",
    "长孙",
    "夏侯",
    "轩辕",
    "端木",
    "独孤",
    "南宫",
    "西门",
    "司徒",
    "宇文",
    "呼延",
    "澹台",
    "完颜",
)

_ZH_JOBS = _set(
    """老师 教师 医生 护士 律师 工程师 程序员 设计师 会计 会计师 厨师 司机 警察 军人 士兵 农民 工人
    学生 大学生 研究生 博士生 教授 讲师 记者 编辑 作家 翻译 演员 歌手 模特 画家 摄影师 导演 主播
    主持人 博主 销售 客服 秘书 助理 经理 总监 主管 老板 店主 创业者 自由职业者 公务员 保安 保姆
    快递员 外卖员 骑手 服务员 收银员 理发师 建筑师 科学家 研究员 分析师 产品经理 运营 电工 木匠
    飞行员 空姐 空乘 船员 渔民 牧民 商人 个体户 家庭主妇 全职妈妈 全职太太 实习生 留学生 码农
    法官 检察官 外交官 消防员 兽医 药剂师 咨询师 教练 运动员 导游 学者 作者 开发 前端 后端 测试
    财务 人事 投资人 职员 员工 店员 售货员 快递小哥 外卖小哥 律师助理 合伙人 创始人 负责人 经纪人
    主任 医师 院长 校长 店长 厂长 站长 馆长 up主 UP主 HR CEO CTO IT"""
)

_ZH_NON_JOBS = _set(
    """会员 成员 党员 团员 队员 男生 女生 新生 先生 病人 患者 新手 高手 老手 粉丝 球迷 歌迷 影迷
    书迷 游客 用户 顾客 客人 大家 国家 人家 老家 好人 坏人 男人 女人 母亲 父亲 妈妈 爸爸 家长
    吃货 宅男 宅女 单身狗 社恐 素食者 初学者 爱好者 消费者 使用者 读者 观众 受害者 幸存者
    打工人 普通人 外地人 本地人 学渣 学霸 家里蹲"""
)

_ZH_LANGUAGES = _set(
    "普通话 国语 中文 汉语 华语 英文 英语 粤语 广东话 白话 闽南语 闽南话 台语 客家话 日语 日文 韩语"
    " 韩文 法语 德语 俄语 手语"
)

_ZH_NOT_LANGUAGES = _set(
    """的话 实话 真话 假话 废话 大话 坏话 好话 笑话 电话 说话 这话 那话 一句话 鬼话 情话 悄悄话
    心里话 脏话 粗话 空话 闲话 谎话 作文 论文 课文 原文 全文 正文 短文 散文 语文 成语 俗语 咒语
    标语 评语 术语 外语 母语 对话 童话 神话 梦话 傻话 气话 胡话 客气话 场面话 这句话 那句话 人话
    中国话 英文歌"""
)
